"""``mf.train``: the TF1 training API (optimizers, global step; cluster and sessions later)."""
