# tessera-install.cmake — installs the SDK for out-of-tree plugins: the CMake
# package (find_package(tessera) gives tessera::plugin, tessera::tessera and
# tessera_add_plugin()), a pkg-config file, and the plugin directory
# <libdir>/tessera that the loader searches by default (with the CUDA
# backend, tessera-backend-cuda.so, when the build has one). Included once by the
# top-level CMakeLists.txt, after the `tessera` target exists.
include(CMakePackageConfigHelpers)

set(TESSERA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/tessera)
set(TESSERA_INSTALL_PLUGINDIR ${CMAKE_INSTALL_LIBDIR}/tessera)

# The plugin ABI version, read from the SDK header so there is one source.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/tessera/plugin.h _ts_abi_lines
  REGEX "^#define TS_PLUGIN_ABI_(MAJOR|MINOR) [0-9]+")
foreach(_line ${_ts_abi_lines})
  if(_line MATCHES "TS_PLUGIN_ABI_MAJOR ([0-9]+)")
    set(TESSERA_PLUGIN_ABI_MAJOR ${CMAKE_MATCH_1})
  elseif(_line MATCHES "TS_PLUGIN_ABI_MINOR ([0-9]+)")
    set(TESSERA_PLUGIN_ABI_MINOR ${CMAKE_MATCH_1})
  endif()
endforeach()
set(TESSERA_PLUGIN_ABI "${TESSERA_PLUGIN_ABI_MAJOR}.${TESSERA_PLUGIN_ABI_MINOR}")

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/tesseraConfig.cmake.in
  ${CMAKE_BINARY_DIR}/cmake/tesseraConfig.cmake
  INSTALL_DESTINATION ${TESSERA_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR TESSERA_INSTALL_PLUGINDIR)
write_basic_package_version_file(
  ${CMAKE_BINARY_DIR}/cmake/tesseraConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
# The .pc file finds its prefix relative to itself, so that
# `cmake --install --prefix P` gives a file valid under P.
file(RELATIVE_PATH TESSERA_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${PROJECT_SOURCE_DIR}/cmake/tessera.pc.in
  ${CMAKE_BINARY_DIR}/cmake/tessera.pc @ONLY)

install(FILES
  ${CMAKE_BINARY_DIR}/cmake/tesseraConfig.cmake
  ${CMAKE_BINARY_DIR}/cmake/tesseraConfigVersion.cmake
  DESTINATION ${TESSERA_INSTALL_CMAKEDIR})
install(FILES ${CMAKE_BINARY_DIR}/cmake/tessera.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(DIRECTORY DESTINATION ${TESSERA_INSTALL_PLUGINDIR})
# The CUDA backend (cmake/gpu.cmake) goes next to the plugins: the core looks
# for <libdir>/tessera/tessera-backend-cuda.so beside libtessera.so.
if(TARGET tessera_backend_cuda)
  install(TARGETS tessera_backend_cuda LIBRARY DESTINATION ${TESSERA_INSTALL_PLUGINDIR})
endif()

# In-tree plugins: tessera_plugin(NAME SOURCES...) builds a MODULE
# tessera-<name>.so into <build>/tessera — the directory the loader searches
# next to libtessera.so — and installs it into <libdir>/tessera.
function(tessera_plugin name)
  add_library(tessera_plugin_${name} MODULE ${ARGN})
  target_include_directories(tessera_plugin_${name} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  # In-tree plugins are ABI 1.3 plugins: the host's sub-tables and the
  # descriptor's flags (include/tessera/plugin.h).
  target_compile_definitions(tessera_plugin_${name} PRIVATE TS_PLUGIN_TARGET_MINOR=3)
  target_link_options(tessera_plugin_${name} PRIVATE -Wl,--no-undefined)
  set_target_properties(tessera_plugin_${name} PROPERTIES PREFIX "" SUFFIX ".so"
    OUTPUT_NAME tessera-${name} C_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY $<TARGET_FILE_DIR:tessera>/tessera)
  install(TARGETS tessera_plugin_${name} LIBRARY DESTINATION ${TESSERA_INSTALL_PLUGINDIR})
endfunction()
