# The C-level functions of ``_sorted_c.pyx`` that other compiled modules cimport: the key
# comparison and the heap functions (``heapq``'s algorithm, keys compared by ``_lt``).

cdef int _lt(object a, object b) except -1
cpdef heappush(list heap, item)
cpdef heappop(list heap)
cpdef heapify(list heap)
