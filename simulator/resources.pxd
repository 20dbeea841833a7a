# Cython declarations for resources.py (setup.py compiles it; the Python source is unchanged). The units'
# attributes become C fields: floats that only ever hold floats as doubles, the rest Python objects, so that
# every value keeps the type, and every sum the rounding, that the source gives it.

cdef class Port:
    cdef public object env, t, _seq, _timer, _timer_at
    cdef public str name
    cdef public double rate, copies, requester_rate, V, work, owed
    cdef public list heap, departed
    cdef public dict queues
    cdef public set serving

cdef class SharedUnit:
    cdef public str name
    cdef public double rate, work
    cdef public object t0, _next_id
    cdef public dict active, caps, capn, done, _memo
    cdef public set _detached
