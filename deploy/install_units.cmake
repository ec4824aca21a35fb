# Run by `cmake --install` (and by cpack): installs the systemd units with ExecStart naming the
# binary where this install puts it, and creates the pipeline directory the unit reads
# (/etc/driftd/pipelines for a /usr install, <prefix>/etc/driftd/pipelines otherwise).
# Documentation= names the docs where install_docs.cmake puts them.
# Set by the caller: DRIFTD_SOURCE_DIR, DRIFTD_UNIT_DIR and DRIFTD_DOC_DIR (relative to the
# prefix).
set(prefix "${CMAKE_INSTALL_PREFIX}")
if(prefix STREQUAL "/usr")
  set(etc "/etc")
else()
  set(etc "${prefix}/etc")
endif()
foreach(unit driftd.service driftd@.service)
  file(READ "${DRIFTD_SOURCE_DIR}/deploy/systemd/${unit}" text)
  string(REPLACE "/usr/bin/driftd" "${prefix}/bin/driftd" text "${text}")
  string(REPLACE " /etc/driftd/" " ${etc}/driftd/" text "${text}")
  string(REPLACE "file:/usr/share/doc/driftd/" "file:${prefix}/${DRIFTD_DOC_DIR}/" text "${text}")
  set(target "$ENV{DESTDIR}${prefix}/${DRIFTD_UNIT_DIR}/${unit}")
  message(STATUS "Installing: ${target}")
  file(WRITE "${target}" "${text}")
endforeach()
message(STATUS "Installing: $ENV{DESTDIR}${etc}/driftd/pipelines")
file(MAKE_DIRECTORY "$ENV{DESTDIR}${etc}/driftd/pipelines")
