"""Adam's step for all parameters at once: one kernel call on flat buffers instead of one per array.

A network's parameters are many small arrays (a 3-layer GAT has 18, most of
64 values): Adam's per-array kernel took 2-6 us each, and the Python around
it (checks, views, dispatch) about 10 us more, so the optimizer took about
270 us of a 64-scene training step. Here the moments of every parameter live
in two flat buffers (the state's ``exp_avg`` / ``exp_avg_sq`` arrays are
views of them), and a step gathers the gradients and the parameters into
flat buffers, makes one finiteness check and one kernel call, and writes the
parameters back. The update is elementwise with the same scalars, so the
result is the same bits as the per-array path (tested).

It applies when every parameter gets a C-contiguous gradient of its own
dtype and shape, all parameters share one float dtype, and every state is
empty or at one common step count with its moments still the flat buffers'
views (a loaded state is copied into new buffers once). Anything else,
including a non-finite gradient (whose error names the parameter), goes
through the per-array path.
"""

from __future__ import annotations

import numpy as np

from .. import _validate as V
from ..kernels.optim import adam_update

__all__ = ["MEAN_SIZE", "FlatMoments"]

#: Above this many elements per parameter on average the per-array path is kept: the flat path
#: moves every element through four more copies (gradients and parameters in, parameters out),
#: which costs as much as the Python it saves at Cora's 12 parameters of 15,000 values on average
#: (0.38-0.41 ms a step either way, 2-vCPU AMD EPYC), where a 3-layer network's 18 parameters of
#: 530 values took 0.10-0.12 ms instead of 0.26-0.27 ms.
MEAN_SIZE = 8192


class FlatMoments:
    """The flat buffers of one optimizer's parameters (in the order of ``params``)."""

    def __init__(self, params):
        arrays = list(params.values())
        self.names = list(params)
        self.arrays = arrays
        self.dtype = arrays[0].dtype
        sizes = [a.size for a in arrays]
        self.bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        total = self.bounds[-1]
        self.param_views = [a.reshape(-1) for a in arrays]  # the model's arrays, flat (views: C-contiguous)
        self.p = np.empty(total, self.dtype)
        self.g = np.empty(total, self.dtype)
        self.m = np.zeros(total, self.dtype)
        self.v = np.zeros(total, self.dtype)
        self.m_views = self._views(self.m, arrays)
        self.v_views = self._views(self.v, arrays)

    def _views(self, flat, arrays):
        return [flat[a:b].reshape(arr.shape) for a, b, arr in zip(self.bounds, self.bounds[1:], arrays)]

    @staticmethod
    def applies(params, dtypes):
        """Whether ``params`` can be updated through flat buffers: several C-contiguous arrays of one
        of ``dtypes`` (the kernel's), no two sharing memory (the per-array path updates an aliased
        array twice)."""
        arrays = list(params.values())
        dtype = arrays[0].dtype
        if len(arrays) < 2 or dtype not in dtypes or sum(a.size for a in arrays) > MEAN_SIZE * len(arrays):
            return False
        if not all(a.dtype == dtype and a.flags.c_contiguous for a in arrays):
            return False
        return not any(np.may_share_memory(a, b) for k, a in enumerate(arrays) for b in arrays[k + 1 :])

    def adopt(self, state):
        """Point every state's moments at the flat buffers (copying what they hold); the common step.

        Returns None when the states are not all empty or all at one step count.
        """
        states = [state[name] for name in self.names]
        if all(not st for st in states):
            self.m[...] = 0
            self.v[...] = 0
            for st, m, v in zip(states, self.m_views, self.v_views):
                st.update(step=0, exp_avg=m, exp_avg_sq=v)
            return 0
        steps = {st.get("step") for st in states}
        if len(steps) != 1 or not all(st for st in states):
            return None
        for st, views in zip(states, zip(self.m_views, self.v_views)):
            for key, view in zip(("exp_avg", "exp_avg_sq"), views):
                held = st.get(key)
                # a moment of another shape or dtype: the per-array path names it (no broadcast, no cast)
                if type(held) is not np.ndarray or held.shape != view.shape or held.dtype != view.dtype:
                    return None
        for st, views in zip(states, zip(self.m_views, self.v_views)):
            for key, view in zip(("exp_avg", "exp_avg_sq"), views):  # each moment on its own
                if st[key] is not view:
                    view[...] = st[key]
                    st[key] = view
        return steps.pop()

    def owns(self, state):
        """Whether every state's moments are still this object's views."""
        for name, m, v in zip(self.names, self.m_views, self.v_views):
            st = state[name]
            if st.get("exp_avg") is not m or st.get("exp_avg_sq") is not v:
                return False
        return True

    def matches(self, params):
        """Whether ``params`` still holds, in order, the arrays these buffers were laid out for."""
        return len(params) == len(self.arrays) and all(a is b for a, b in zip(params.values(), self.arrays))

    def gather(self, params, grads):
        """Copy the gradients into the flat buffer; False where one does not fit the flat path
        (``params`` must :meth:`match <matches>`)."""
        dtype = self.dtype
        flats = []
        for name, param in params.items():
            g = grads.get(name)
            if (
                type(g) is not np.ndarray
                or g.dtype != dtype
                or g.shape != param.shape
                or not g.flags.c_contiguous
            ):
                return False
            flats.append(g.reshape(-1))
        np.concatenate(flats, out=self.g)
        return V.all_finite(self.g)

    def update(self, scalars):
        """One kernel call over every parameter, then the parameters written back."""
        np.concatenate(self.param_views, out=self.p)
        adam_update(self.p, self.g, self.m, self.v, *scalars)
        p = self.p
        for view, a, b in zip(self.param_views, self.bounds, self.bounds[1:]):
            view[...] = p[a:b]
