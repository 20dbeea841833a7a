# Cython declarations for timing.py (setup.py compiles it; the Python source is unchanged): a role's fields
# as C fields, Python objects all but the two op counters, which only ever hold small whole numbers. The
# helpers the op loop calls for every op are cpdef (C calls from this module), their arguments Python objects.

cdef class RoleTimer:
    cdef public object gpu, sm, barriers, flow, env, p, tokens, trace, track, skip, pulled_at, history
    cdef public object ahead, ahead_sigs, source, windows, code_ready, front_left, front_hidden
    cdef public Py_ssize_t pulled, at

    cpdef repeats_ahead(self, n, most, memo)
    cpdef drop(self, n)


cpdef pipe_share(warps, sub_partitions)
cpdef tuple _load_lags(tuple plan, requests, sm, p)
cpdef _replayed_lag(tuple plan, sm, p)
cpdef tuple _keep(dict plans, op, tuple plan)
cpdef list _block_share(wants, blocks)
cpdef list _waits(op, kind, dict inflight)
