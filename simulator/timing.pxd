# Cython declarations for timing.py (setup.py compiles it; the Python source is unchanged): a role's fields
# as C fields, Python objects all but the two op counters, which only ever hold small whole numbers.

cdef class RoleTimer:
    cdef public object gpu, sm, barriers, flow, env, p, tokens, trace, track, skip, pulled_at, history
    cdef public object ahead, ahead_sigs, source, windows, code_ready, front_left, front_hidden
    cdef public Py_ssize_t pulled, at
