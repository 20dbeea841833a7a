# Cython declarations for resources.py (setup.py compiles it; the Python source is unchanged). The units'
# attributes become C fields: rates and byte totals as doubles (the source starts the totals at 0.0; a rate an
# SM unit takes from a profile may be a whole number, which a double holds exactly, and each rate is only ever
# divided by or multiplied into floats), the rest Python objects. The methods the units call on themselves are
# cpdef, so those calls are C calls (no subclass overrides them: final); arguments and locals stay Python
# objects, so every value keeps its type. tests/test_compiled.py checks the answers equal the source's to the bit.

cimport cython


@cython.final
cdef class Server:
    cdef public str name
    cdef public object rate, next_free, busy, work

    cpdef reserve(self, t, work)


@cython.final
cdef class Port:
    cdef public object env, t, _seq, _timer, _timer_at
    cdef public str name
    cdef public double rate, copies, requester_rate, V, work, owed, weight
    cdef public list heap, departed
    cdef public dict queues
    cdef public set serving

    cpdef _advance(self, now)
    cpdef _share(self)
    cpdef _announce(self, now)
    cpdef submit(self, now, work, callback=*, flow=*, latency=*, weight=*)
    cpdef _wake(self)
    cpdef _fire(self, event)


@cython.final
cdef class SharedUnit:
    cdef public str name
    cdef public double rate, work
    cdef public object t0, _next_id
    cdef public dict active, caps, capn, done, _memo
    cdef public set _detached

    cpdef tuple _two(self, dict work)
    cpdef dict _shares(self, dict work)
    cpdef _common_cap(self)
    cpdef _finish(self, k, t)
    cpdef _advance(self, now)
    cpdef submit(self, now, work, cap=*)
    cpdef estimate(self, now, rid)
    cpdef _play_pair(self, rid)
    cpdef _play_all(self, rid)
    cpdef _play_equal(self, rid)
    cpdef _play(self, rid)
    cpdef _play_loop(self, rid)
    cpdef _play_two(self, rid)
    cpdef release(self, rid)
    cpdef busy_cycles(self, now)


@cython.final
cdef class QueueUnit:
    cdef public Server server
    cdef public dict ends
    cdef public object _next_id

    cpdef submit(self, now, work, cap=*)
    cpdef estimate(self, now, rid)
    cpdef release(self, rid)
    cpdef busy_cycles(self, now)


@cython.final
cdef class Barrier:
    cdef public object env, count, skipped
    cdef public list waiters

    cpdef arrive(self, n=*)
    cpdef wait(self, target)
