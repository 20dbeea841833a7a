# Cython declarations for l2.py (setup.py compiles it; the Python source is unchanged): the cache's counters as
# C fields holding Python objects (each keeps its own type: whole bytes stay integers), its line tables kept as
# the OrderedDicts they are, and the methods it calls on itself for every line as C calls.

cimport cython


@cython.final
cdef class L2Cache:
    cdef public object capacity, dirty_max, dirty, dirty_room, lines, used, read_bytes, write_bytes, miss_bytes
    cdef public object evicted_dirty_bytes, flush_written_back, evictions, evicted_room, _charged
    cdef public dict _tiles, miss_weights

    cpdef read(self, g, now, copies=*)
    cpdef write(self, g, copies=*)
    cpdef _fill(self, entry, absent, slice_bytes, copies)
    cpdef _grow(self, entry, chip_bytes)
    cpdef _evict(self, entry)
    cpdef _evicted_dirty(self, key, entry)
    cpdef _written_back(self, key, entry)
