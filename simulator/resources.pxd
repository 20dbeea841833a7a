# Cython declarations for resources.py (setup.py compiles it; the Python source is unchanged). The units'
# attributes become C fields: rates and byte totals as doubles (the source starts the totals at 0.0; a rate an
# SM unit takes from a profile may be a whole number, which a double holds exactly, and each rate is only ever
# divided by or multiplied into floats), the rest Python objects. tests/test_compiled.py checks the answers
# equal the source's to the bit.

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
