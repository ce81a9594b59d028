# Installation (`cmake --install`) and the Debian package (`cpack -G DEB`).
#
# Paths that depend on the prefix (the unit's ExecStart, the configuration
# directory) are worked out when the files are installed, not when the build
# is configured: `cmake --install --prefix P`, a plain install into
# /usr/local and the package (prefix /usr) each get a unit that runs the
# binary they installed, and configuration under /etc for /usr (as the
# FHS and GNUInstallDirs say), under PREFIX/etc otherwise.
include(GNUInstallDirs)

# Whoever builds the package maintains it: set AMON_MAINTAINER to your name
# and address (the default has no mail host, which lintian says).
set(AMON_MAINTAINER "amon maintainers <amon@localhost>" CACHE STRING "Maintainer: field of the Debian package")

install(TARGETS amon RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
file(GLOB AMON_SHIPPED_POLICIES ${CMAKE_SOURCE_DIR}/rules/*.amon)
install(FILES ${AMON_SHIPPED_POLICIES} rules/README.md DESTINATION ${CMAKE_INSTALL_DATADIR}/amon/rules)
install(FILES packaging/amon.yaml DESTINATION ${CMAKE_INSTALL_DATADIR}/amon)

# Documentation: /usr/share/doc/amon (amon(8) points there), with the
# copyright file and changelog Debian policy asks for.
file(GLOB AMON_DOCS ${CMAKE_SOURCE_DIR}/doc/*.md)
install(FILES README.md ${AMON_DOCS} packaging/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})

# Man pages and the changelog compressed (gzip -9n: no name or time inside,
# so the same sources give the same package), made at configure time since
# an install builds nothing but the amon target.
set(AMON_VERSION ${PROJECT_VERSION})
set(_pkgdir ${CMAKE_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${_pkgdir})
configure_file(packaging/amon.8 ${_pkgdir}/amon.8 @ONLY)
configure_file(packaging/amon.policy.5 ${_pkgdir}/amon.policy.5 @ONLY)
configure_file(packaging/changelog.in ${_pkgdir}/changelog @ONLY)
foreach(f amon.8 amon.policy.5 changelog)
  execute_process(COMMAND gzip -9nf -k ${_pkgdir}/${f} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "gzip ${_pkgdir}/${f} failed")
  endif()
endforeach()
install(FILES ${_pkgdir}/amon.8.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
install(FILES ${_pkgdir}/amon.policy.5.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man5)
install(FILES ${_pkgdir}/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})

# Prefix-dependent files, worked out at install time. The service's
# configuration: amon.yaml and the two policies it names, and an empty keys/
# directory readable by root only (the package's postinst creates the keys).
set(AMON_SRC ${CMAKE_SOURCE_DIR})
set(_code [[
  set(_p "${CMAKE_INSTALL_PREFIX}")
  if(_p STREQUAL "/usr")
    set(_etc "/etc")
  else()
    set(_etc "${_p}/etc")
  endif()
  set(AMON_BINDIR "${_p}/bin")
  set(AMON_SYSCONFDIR "${_etc}/amon")
  set(_gen "${CMAKE_CURRENT_BINARY_DIR}/packaging/install")
  file(MAKE_DIRECTORY "${_gen}")
  configure_file("@AMON_SRC@/packaging/amon.service.in" "${_gen}/amon.service" @ONLY)
  # The unit lives under the prefix's lib/, except for /usr, where Debian 12
  # keeps units in /lib/systemd/system.
  if(_p STREQUAL "/usr")
    set(_unitdir "/lib/systemd/system")
  else()
    set(_unitdir "${_p}/lib/systemd/system")
  endif()
  file(INSTALL "${_gen}/amon.service" DESTINATION "${_unitdir}")
  file(INSTALL "@AMON_SRC@/packaging/amon.yaml" "@AMON_SRC@/rules/ids.amon" "@AMON_SRC@/rules/meter.amon"
       DESTINATION "${_etc}/amon")
  file(MAKE_DIRECTORY "$ENV{DESTDIR}${_etc}/amon/keys")
  file(CHMOD "$ENV{DESTDIR}${_etc}/amon/keys" DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
]])
# Only the source folder is put in now; the ${...} stay for the install.
string(CONFIGURE "${_code}" _code @ONLY)
install(CODE "${_code}")

# Install and cpack take what is built (the amon target) rather than building
# every test first.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME amon)
set(CPACK_PACKAGE_CONTACT "${AMON_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "real-time traffic anonymizer for passive network monitors")
set(CPACK_PACKAGE_DESCRIPTION "amon receives a link's packets (DPDK ports or capture files), makes one copy
per consumer (IDS, passive meter, flow exporter) and anonymizes each copy by
that consumer's policy: Crypto-PAn for client addresses, z-anonymity for
names and server addresses, payload policies, L2 to L7.")
# The install prefix is /usr and the files are staged under DESTDIR, so the
# install-time rules above see the prefix the package installs to.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# A stripped binary; its debug symbols go to amon-dbgsym (a .ddeb): CPackDeb
# splits them off itself, so the files must reach it unstripped.
set(CPACK_STRIP_FILES OFF)
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
# Library dependencies (DPDK, Hyperscan, OpenSSL, libyaml, libpcap, libpsl,
# libsystemd) from the binary itself, by dpkg-shlibdeps.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A static DPDK (AmonDpdk.cmake) is inside the binary. A shared one loads its
# drivers as plugins (no link-time dependency): the mempool drivers amon's
# pools need (ring live, stack offline) and the virtual devices it
# documents.
if(NOT AMON_DPDK_STATIC)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "librte-mempool-ring23, librte-mempool-stack23, librte-net-pcap23, librte-net-af-packet23, librte-net-af-xdp23, librte-net-null23, librte-net-ring23")
endif()
# dpdk-telemetry.py (amon(8), live counters) is in dpdk-dev; the NIC drivers
# a deployment binds are in dpdk.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "dpdk, dpdk-dev")
# The configuration under /etc is the administrator's (conffiles); postinst
# creates the keys the shipped configuration names, postrm removes them on purge.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/packaging/debian/conffiles
    ${CMAKE_SOURCE_DIR}/packaging/debian/postinst
    ${CMAKE_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
