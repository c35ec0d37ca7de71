"""The optimizer updates written out in plain numpy: the spec the fused ops are tested against.

Each ``update_*`` takes the state (``{"var": ..., slot: ...}``, float64 arrays), the
gradient and the hyperparameters, and returns the new state without touching its inputs.
``sparse_rows`` applies an update to the touched rows only, after summing duplicate
indices with an explicit loop, as TF's optimizers do.
"""

import numpy as np


def update_gradient_descent(s, g, alpha):
    return {"var": s["var"] - alpha * g}


def update_momentum(s, g, lr, momentum, use_nesterov=False):
    accum = s["accum"] * momentum + g
    if use_nesterov:
        var = s["var"] - (lr * g + lr * momentum * accum)
    else:
        var = s["var"] - lr * accum
    return {"var": var, "accum": accum}


def update_adagrad(s, g, lr):
    accum = s["accum"] + g * g
    return {"var": s["var"] - lr * g / np.sqrt(accum), "accum": accum}


def update_rmsprop(s, g, lr, rho, momentum, epsilon):
    ms = rho * s["ms"] + (1 - rho) * g * g
    mom = momentum * s["mom"] + lr * g / np.sqrt(ms + epsilon)
    return {"var": s["var"] - mom, "ms": ms, "mom": mom}


def update_centered_rmsprop(s, g, lr, rho, momentum, epsilon):
    mg = rho * s["mg"] + (1 - rho) * g
    ms = rho * s["ms"] + (1 - rho) * g * g
    mom = momentum * s["mom"] + lr * g / np.sqrt(ms - mg * mg + epsilon)
    return {"var": s["var"] - mom, "mg": mg, "ms": ms, "mom": mom}


def update_adam(s, g, beta1_power, beta2_power, lr, beta1, beta2, epsilon,
                use_nesterov=False):
    lr_t = lr * np.sqrt(1 - beta2_power) / (1 - beta1_power)
    m = beta1 * s["m"] + (1 - beta1) * g
    v = beta2 * s["v"] + (1 - beta2) * g * g
    numer = beta1 * m + (1 - beta1) * g if use_nesterov else m
    return {"var": s["var"] - lr_t * numer / (np.sqrt(v) + epsilon), "m": m, "v": v}


def update_ftrl(s, g, lr, l1, l2, lr_power, l2_shrinkage=0.0):
    """FTRL-Proximal: var minimises linear . w + l1 |w|_1 + (1/2) quadratic |w|^2."""
    accum = s["accum"] + g * g
    sigma = (accum ** -lr_power - s["accum"] ** -lr_power) / lr
    linear = s["linear"] + (g + 2 * l2_shrinkage * s["var"]) - sigma * s["var"]
    quadratic = accum ** -lr_power / lr + 2 * l2
    var = np.where(np.abs(linear) > l1, -(linear - np.sign(linear) * l1) / quadratic, 0.0)
    return {"var": var, "accum": accum, "linear": linear}


def update_adadelta(s, g, lr, rho, epsilon):
    accum = rho * s["accum"] + (1 - rho) * g * g
    update = np.sqrt(s["accum_update"] + epsilon) / np.sqrt(accum + epsilon) * g
    accum_update = rho * s["accum_update"] + (1 - rho) * update * update
    return {"var": s["var"] - lr * update, "accum": accum, "accum_update": accum_update}


def _proximal(prox, rate, l1, l2):
    """argmin_w |w - prox|^2 / (2 rate) + l1 |w|_1 + (l2 / 2) |w|^2."""
    return np.sign(prox) * np.maximum(np.abs(prox) - rate * l1, 0.0) / (1 + rate * l2)


def update_proximal_gradient_descent(s, g, alpha, l1, l2):
    return {"var": _proximal(s["var"] - alpha * g, alpha, l1, l2)}


def update_proximal_adagrad(s, g, lr, l1, l2):
    accum = s["accum"] + g * g
    rate = lr / np.sqrt(accum)
    return {"var": _proximal(s["var"] - rate * g, rate, l1, l2), "accum": accum}


def densify(values, indices, rows):
    dense = np.zeros((rows,) + values.shape[1:])
    for value, i in zip(values, indices):
        dense[i] += value
    return dense


def sparse_rows(update, s, values, indices, **hypers):
    """Apply ``update`` to the rows in ``indices`` only (duplicates summed first)."""
    out = {k: v.copy() for k, v in s.items()}
    for row in sorted(set(int(i) for i in indices)):
        g = sum(values[j] for j, i in enumerate(indices) if i == row)
        new = update({k: v[row] for k, v in s.items()}, g, **hypers)
        for k, v in new.items():
            out[k][row] = v
    return out
