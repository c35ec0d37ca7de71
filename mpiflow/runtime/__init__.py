"""Session, plans and the executor: runs graphs built with ``mpiflow.framework``/``ops``."""
