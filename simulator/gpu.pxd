# Cython declarations for gpu.py (setup.py compiles it): the objects made for most ops (a timeout) and for every
# load (its landing, and the fetch of the lines it misses) as C structs of Python objects, taken from free lists
# instead of the allocator.

cimport cython


@cython.freelist(512)
@cython.final
cdef class Fetch:
    cdef public list entries, listeners


@cython.freelist(512)
@cython.final
cdef class Landing:
    cdef public object env, then, extra, at, parts


@cython.freelist(512)
@cython.final
cdef class Timeout:
    cdef public object env, callbacks, _value, _delay, _ok, _defused
