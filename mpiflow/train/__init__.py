"""``mf.train``: the TF1 training API: cluster and server, device setter and partitioners,
optimizers (sync replicas, allreduce, training modes), sessions, hooks and checkpoints."""

from mpiflow import unsupported
from mpiflow.train.adadelta import AdadeltaOptimizer
from mpiflow.train.adagrad import AdagradOptimizer
from mpiflow.train.adam import AdamOptimizer
from mpiflow.train.allreduce_optimizer import AllreduceOptimizer, join
from mpiflow.train.checkpoint_management import (
    CheckpointState, checkpoint_exists, get_checkpoint_mtimes, get_checkpoint_state,
    latest_checkpoint, remove_checkpoint, update_checkpoint_state)
from mpiflow.train.checkpoint_utils import (
    CheckpointReader, NewCheckpointReader, list_variables, load_checkpoint, load_variable)
from mpiflow.train.cluster_spec import ClusterSpec
from mpiflow.train.compression import GradientCompressionOptimizer
from mpiflow.train.device_setter import (
    GreedyLoadBalancingStrategy, byte_size_load_fn, replica_device_setter)
from mpiflow.train.global_step import (
    assert_global_step, create_global_step, get_global_step, get_or_create_global_step,
    global_step)
from mpiflow.train.ftrl import FtrlOptimizer
from mpiflow.train.gradient_descent import GradientDescentOptimizer
from mpiflow.train.learning_rate_decay import (
    cosine_decay, cosine_decay_restarts, exponential_decay, inverse_time_decay,
    linear_cosine_decay, natural_exp_decay, piecewise_constant, polynomial_decay)
from mpiflow.train.modes import TrainingMode
from mpiflow.train.moving_averages import ExponentialMovingAverage
from mpiflow.train.momentum import MomentumOptimizer
from mpiflow.train.optimizer import Optimizer
from mpiflow.train.proximal import ProximalAdagradOptimizer, ProximalGradientDescentOptimizer
from mpiflow.train.rmsprop import RMSPropOptimizer
from mpiflow.train.saver import Saver
from mpiflow.train.server import Server
from mpiflow.train.warm_starting import init_from_checkpoint, warm_start
from mpiflow.train.basic_hooks import (
    CheckpointSaverHook, CheckpointSaverListener, FeedFnHook, FinalOpsHook, GlobalStepWaiterHook,
    LoggingTensorHook, NanLossDuringTrainingError, NanTensorHook, SecondOrStepTimer,
    StopAtStepHook)
from mpiflow.train.coordinator import Coordinator
from mpiflow.train.monitored_session import (
    ChiefSessionCreator, MonitoredSession, MonitoredTrainingSession, Scaffold, SessionCreator,
    SingularMonitoredSession, StepContext, WorkerSessionCreator)
from mpiflow.train.reporting_hooks import (
    ProfilerHook, ProgressBarHook, StepCounterHook, SummarySaverHook, progress_report)
from mpiflow.train.session_manager import SessionManager, report_uninitialized_variables
from mpiflow.train.session_run_hook import (
    SessionRunArgs, SessionRunContext, SessionRunHook, SessionRunValues)
from mpiflow.train.supervisor import Supervisor
from mpiflow.train.staleness import DropStaleGradientOptimizer, StalenessAwareOptimizer
from mpiflow.train.sync_replicas import SyncReplicasOptimizer

__all__ = [
    "AdagradOptimizer", "AdamOptimizer", "GradientDescentOptimizer", "MomentumOptimizer",
    "Optimizer", "RMSPropOptimizer", "assert_global_step", "create_global_step",
    "exponential_decay",
    "get_global_step", "get_or_create_global_step", "global_step", "piecewise_constant",
    "GreedyLoadBalancingStrategy", "byte_size_load_fn", "replica_device_setter",
    "ClusterSpec", "Server", "SyncReplicasOptimizer", "AllreduceOptimizer", "TrainingMode",
    "StalenessAwareOptimizer", "DropStaleGradientOptimizer", "GradientCompressionOptimizer",
    "join", "AdadeltaOptimizer", "FtrlOptimizer", "ProximalAdagradOptimizer",
    "ProximalGradientDescentOptimizer",
]
__all__ += [
    "CheckpointState", "Saver", "checkpoint_exists", "get_checkpoint_mtimes",
    "get_checkpoint_state", "latest_checkpoint", "list_variables", "load_variable",
    "remove_checkpoint", "update_checkpoint_state", "CheckpointReader",
    "NewCheckpointReader", "load_checkpoint", "init_from_checkpoint", "warm_start",
]
__all__ += [
    "cosine_decay", "cosine_decay_restarts", "inverse_time_decay", "linear_cosine_decay",
    "natural_exp_decay", "polynomial_decay", "ExponentialMovingAverage",
]
__all__ += [
    "CheckpointSaverHook", "CheckpointSaverListener", "FeedFnHook", "FinalOpsHook",
    "GlobalStepWaiterHook", "LoggingTensorHook", "NanLossDuringTrainingError", "NanTensorHook", "ProfilerHook",
    "ProgressBarHook",
    "SecondOrStepTimer", "StepCounterHook", "StopAtStepHook", "SummarySaverHook",
    "progress_report",
    "Coordinator", "ChiefSessionCreator", "MonitoredSession", "MonitoredTrainingSession",
    "Scaffold", "SessionCreator", "SingularMonitoredSession", "StepContext",
    "WorkerSessionCreator", "SessionManager", "report_uninitialized_variables",
    "SessionRunArgs", "SessionRunContext", "SessionRunHook", "SessionRunValues",
    "Supervisor",
]

__getattr__ = unsupported.namespace_getattr(__name__, "tf.train")
