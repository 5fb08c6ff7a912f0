"""The roofline model of one GATv2 layer step, in parts (``bench/roofline.py`` is the command line).

* ``cpu``: what the CPU announces (model, SIMD width, L3 size) and process facts;
* ``probes``: the Numba kernels that measure streams, gathers and flops;
* ``measure``: timing helpers and the probe records;
* ``machine``: the machine figures (probe runs) and ``rates``: the ceilings derived from them;
* ``model``: the byte/flop model (``Dims``, ``Model``, ``Gather``) and the bound arithmetic;
* ``kernels``: one function per kernel of a layer step: its model and its call;
* ``state``: the arrays those calls take, prepared as the layer prepares them;
* ``timing``: kernels, step and ceiling probes timed in the same rounds;
* ``report``: the markdown tables.

The assumptions are described in the docstring of ``bench/roofline.py``.
"""
