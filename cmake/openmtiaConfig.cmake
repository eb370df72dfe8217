# openmtia for C++: find_package(openmtia) with CMAKE_PREFIX_PATH holding
# openmtia.cmake_prefix_path (python -c "import openmtia; print(openmtia.cmake_prefix_path)"),
# beside torch's (torch.utils.cmake_prefix_path; find_package(Torch) first).
#
#   openmtia::openmtia  libopenmtia.so: the mtia backend without Python (it
#                       loads the driver beside it, or OPENMTIA_DRIVER), and
#                       with it libopenmtia_aoti.so (mtia's AOTInductor shim
#                       and model runner); headers <openmtia/openmtia.h>,
#                       <openmtia/aoti_mtia.h>
#
# Installed as openmtia/share/cmake/openmtia/ inside the Python package.
get_filename_component(_openmtia_root "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
foreach(_lib openmtia openmtia_aoti)
  if(NOT EXISTS "${_openmtia_root}/lib${_lib}.so")
    set(openmtia_FOUND FALSE)
    set(openmtia_NOT_FOUND_MESSAGE "${_openmtia_root}/lib${_lib}.so is missing: build openmtia first")
    return()
  endif()
endforeach()
if(NOT TARGET openmtia::openmtia)
  add_library(openmtia::aoti SHARED IMPORTED)
  set_target_properties(openmtia::aoti PROPERTIES
    IMPORTED_LOCATION "${_openmtia_root}/libopenmtia_aoti.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_openmtia_root}/include")
  add_library(openmtia::openmtia SHARED IMPORTED)
  set_target_properties(openmtia::openmtia PROPERTIES
    IMPORTED_LOCATION "${_openmtia_root}/libopenmtia.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_openmtia_root}/include"
    INTERFACE_LINK_LIBRARIES openmtia::aoti)
endif()
set(openmtia_INCLUDE_DIRS "${_openmtia_root}/include")
set(openmtia_LIBRARIES openmtia::openmtia)
set(openmtia_FOUND TRUE)
