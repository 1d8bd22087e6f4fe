// The link unit of libmetajit.so (CMakeLists.txt, METAJIT_SHARED): CMake builds a shared library
// from at least one source of its own; everything the library holds comes from the layers'
// archives, linked whole. Nothing is defined here.
