# amon::dpdk: DPDK for the engine and the programs that run it.
#
# Static by default when the distribution ships DPDK's archives (Debian's
# libdpdk-dev does). A shared DPDK's EAL loads every driver plugin in its PMD
# directory at start-up (Debian: about 190 libraries, 0.1 s or more before
# amon has read a packet); a static DPDK loads none (EAL only scans the
# plugin directory when it was built shared, eal_common_options.c) and carries
# just the drivers listed in AMON_DPDK_DRIVERS.
#
# Drivers register themselves from constructors that nothing else references,
# so they, and the core libraries whose constructors register buses, mempool
# handlers, log types and telemetry commands, are linked whole; the other core
# libraries are searched as a group so that a driver pulls in only what it
# uses. DPDK's own pkg-config (--static) links every driver and library whole,
# which would drag in the Mellanox, XDP, ISA-L, crypto and baseband drivers and
# their system libraries.
#
# With the shared fallback (-DAMON_DPDK_STATIC=OFF) the drivers come from the
# PMD directory at run time, as before, and EAL's -d loads extra ones; a static
# build cannot load driver plugins (they link the shared EAL).

find_file(AMON_DPDK_EAL_ARCHIVE librte_eal.a PATHS ${DPDK_LIBDIR} NO_DEFAULT_PATH)
if(AMON_DPDK_EAL_ARCHIVE)
  set(_amon_dpdk_static_default ON)
else()
  set(_amon_dpdk_static_default OFF)
endif()
option(AMON_DPDK_STATIC "Link DPDK statically (only the drivers in AMON_DPDK_DRIVERS; no plugin loading at start-up)"
       ${_amon_dpdk_static_default})
# The virtual devices amon documents (null, ring, pcap, af_packet, af_xdp), the vdev
# and PCI buses, the mempool handlers (ring for live pools, stack for
# offline ones), and the NIC drivers that need no library outside DPDK
# (Intel 1/10/25/40/100G, virtio, VMXNET3, ENA, Broadcom). Mellanox NICs
# need rdma-core: add net_mlx5 (and link libibverbs/libmlx5) or build with
# AMON_DPDK_STATIC=OFF.
set(AMON_DPDK_DRIVERS
    "bus_vdev;bus_pci;mempool_ring;mempool_stack;net_null;net_ring;net_pcap;net_af_packet;net_af_xdp;net_virtio;net_vmxnet3;net_e1000;net_ixgbe;net_i40e;common_iavf;net_iavf;net_ice;net_ena;net_bnxt"
    CACHE STRING "DPDK drivers linked into a static build (librte_<name>.a)")
# net_af_xdp needs libxdp and libbpf (Debian: libxdp-dev, libbpf-dev);
# without them it is left out, as DPDK's own build leaves it out.
if("net_af_xdp" IN_LIST AMON_DPDK_DRIVERS)
  pkg_check_modules(XDP IMPORTED_TARGET libxdp libbpf)
  if(NOT XDP_FOUND)
    list(REMOVE_ITEM AMON_DPDK_DRIVERS net_af_xdp)
    message(STATUS "DPDK: net_af_xdp left out (libxdp-dev and libbpf-dev not found)")
  endif()
endif()
# Core libraries linked whole: their constructors register what the engine
# looks up by name at run time. EAL is searched instead, so that the TSC
# frequency hook below replaces its x86 one (every other EAL object the
# engine needs is referenced, constructors and all).
set(_amon_dpdk_whole_core kvargs telemetry ring rcu mempool mbuf net meter ethdev pci)

add_library(amon_dpdk INTERFACE)
add_library(amon::dpdk ALIAS amon_dpdk)

if(NOT AMON_DPDK_STATIC)
  target_link_libraries(amon_dpdk INTERFACE PkgConfig::DPDK)
  message(STATUS "DPDK: shared (drivers loaded from the PMD directory at run time)")
  return()
endif()

if(NOT AMON_DPDK_EAL_ARCHIVE)
  message(FATAL_ERROR "AMON_DPDK_STATIC=ON but librte_eal.a is not in ${DPDK_LIBDIR} (install libdpdk-dev)")
endif()

# Headers and compile flags as pkg-config gives them (-include rte_config.h, the
# machine baseline).
get_target_property(_inc PkgConfig::DPDK INTERFACE_INCLUDE_DIRECTORIES)
get_target_property(_opt PkgConfig::DPDK INTERFACE_COMPILE_OPTIONS)
if(_inc)
  target_include_directories(amon_dpdk SYSTEM INTERFACE ${_inc})
endif()
if(_opt)
  target_compile_options(amon_dpdk INTERFACE ${_opt})
endif()

function(_amon_dpdk_archive name out)
  set(t amon_dpdk_a_${name})
  if(NOT TARGET ${t})
    set(path ${DPDK_LIBDIR}/librte_${name}.a)
    if(NOT EXISTS ${path})
      message(FATAL_ERROR "DPDK archive ${path} not found (AMON_DPDK_DRIVERS names a driver this DPDK lacks?)")
    endif()
    add_library(${t} STATIC IMPORTED GLOBAL)
    set_target_properties(${t} PROPERTIES IMPORTED_LOCATION ${path})
  endif()
  set(${out} ${t} PARENT_SCOPE)
endfunction()

set(_whole)
foreach(n IN LISTS AMON_DPDK_DRIVERS _amon_dpdk_whole_core)
  _amon_dpdk_archive(${n} t)
  list(APPEND _whole ${t})
endforeach()

# Every other core library (DPDK_LIBRARIES: the -lrte_* of libdpdk-libs), for
# the drivers to draw on.
set(_group)
foreach(l IN LISTS DPDK_LIBRARIES)
  if(l MATCHES "^rte_(.*)$")
    set(n ${CMAKE_MATCH_1})
    if(NOT n IN_LIST _amon_dpdk_whole_core AND NOT n IN_LIST AMON_DPDK_DRIVERS)
      _amon_dpdk_archive(${n} t)
      list(APPEND _group ${t})
    endif()
  endif()
endforeach()

list(JOIN _whole "," _whole_csv)
list(JOIN _group "," _group_csv)
target_link_libraries(amon_dpdk INTERFACE
  "$<LINK_LIBRARY:WHOLE_ARCHIVE,${_whole_csv}>"
  "$<LINK_GROUP:RESCAN,${_group_csv}>"
  # What the linked archives need from the system (libdpdk-libs' Libs.private,
  # libdpdk's Requires: libbsd; net_pcap: libpcap).
  PkgConfig::PCAP numa fdt bsd dl m atomic Threads::Threads)
if("net_af_xdp" IN_LIST AMON_DPDK_DRIVERS)
  target_link_libraries(amon_dpdk INTERFACE PkgConfig::XDP)
endif()
# EAL's x86 TSC frequency source, without its 100 ms sleep (dpdk_tsc.c). It
# must be an object of each program, not an archive member: an archive member
# is only pulled for a symbol already wanted, and by then EAL's would win.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  target_sources(amon_dpdk INTERFACE ${CMAKE_SOURCE_DIR}/engine/core/dpdk_tsc.c)
endif()
list(LENGTH _whole _nw)
list(LENGTH _group _ng)
message(STATUS "DPDK: static (${_nw} archives whole, ${_ng} searched; drivers: ${AMON_DPDK_DRIVERS})")
