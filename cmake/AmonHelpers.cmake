# Helpers shared by every folder's CMakeLists.txt.
#
# amon_catch_test(NAME SOURCES a.cpp b.cpp LIBS lib1 lib2 [LABELS l])
#   A Catch2 (v2) test program run by ctest. Each test program gets the shared
#   Catch2 main (tests/catch_main.cpp), so sources hold only TEST_CASEs.
# amon_fuzzer(NAME SOURCES f.cpp LIBS lib1 [CORPUS dir])
#   A libFuzzer target (only with -DAMON_FUZZ=ON, clang). Registered with ctest
#   as fuzz_NAME running AMON_FUZZ_SECONDS (default 20) so CI gives every parser
#   a short run; run it by hand for longer: build-fuzz/tests/.../NAME -max_total_time=3600 CORPUS

set(AMON_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzz target runs under ctest")

function(amon_catch_test name)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT AMON_TESTS)
    return()
  endif()
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE amon_catch_main ${A_LIBS})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "unit;${A_LABELS}")
endfunction()

function(amon_fuzzer name)
  cmake_parse_arguments(A "" "CORPUS" "SOURCES;LIBS" ${ARGN})
  if(NOT AMON_FUZZ)
    return()
  endif()
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_LIBS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  set(corpus_dir ${CMAKE_CURRENT_BINARY_DIR}/${name}_corpus)
  set(seed_args)
  if(A_CORPUS)
    set(seed_args ${A_CORPUS})
  endif()
  add_test(NAME fuzz_${name}
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
            $<TARGET_FILE:${name}> -max_total_time=${AMON_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048
            -print_final_stats=1 ${corpus_dir} ${seed_args})
  file(MAKE_DIRECTORY ${corpus_dir})
  set_tests_properties(fuzz_${name} PROPERTIES LABELS "fuzz")
endfunction()

# amon_add_part_subdirs(): every subfolder with a CMakeLists.txt is a part of
# its own (one plugin, component or test group); adding the folder is all it
# takes to add it to the build.
macro(amon_add_part_subdirs)
  file(GLOB _amon_subdirs LIST_DIRECTORIES true RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT _amon_subdirs)
  foreach(_d IN LISTS _amon_subdirs)
    if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${_d} AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_d}/CMakeLists.txt)
      add_subdirectory(${_d})
    endif()
  endforeach()
endmacro()
