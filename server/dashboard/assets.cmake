# Included by server/CMakeLists.txt (so the generated source belongs to its directory):
# the web dashboard's files. Its pages, script and style sheet (assets/) and Chart.js
# (Debian's libjs-chart.js, MIT) are embedded in the binary: no Node build step,
# nothing to install beside the server. Sets TF_DASHBOARD_SOURCES.
set(TF_CHART_JS /usr/share/javascript/chart.js/chart.min.js)
if(NOT EXISTS ${TF_CHART_JS})
  message(FATAL_ERROR "${TF_CHART_JS} not found: install libjs-chart.js (scripts/install-deps)")
endif()
set(assets
  ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/assets/index.html
  ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/assets/login.html
  ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/assets/app.js
  ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/assets/style.css
  ${TF_CHART_JS})
set(generated ${CMAKE_CURRENT_BINARY_DIR}/dashboard_assets.cc)
string(REPLACE ";" "\\;" assets_arg "${assets}")
add_custom_command(
  OUTPUT ${generated}
  COMMAND ${CMAKE_COMMAND} -DOUTPUT=${generated} "-DFILES=${assets_arg}"
          -P ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/embed_assets.cmake
  DEPENDS ${assets} ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/embed_assets.cmake
  COMMENT "Embedding the dashboard's files")

set(TF_DASHBOARD_SOURCES dashboard/dashboard.cc ${generated})
