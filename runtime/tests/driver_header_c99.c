/* driver.h compiles as C99 (-std=c99 -pedantic -Werror); a C driver's view of it. */
#include "openmtia/driver.h"

/* a table's size and a field check, as a C caller writes them */
int openmtia_driver_header_c99_check(const OmtiaDriver* d);
int openmtia_driver_header_c99_check(const OmtiaDriver* d) {
  OmtiaErrorInfo info;
  info.struct_size = sizeof info;
  if (!OMTIA_HAS_FIELD(d, OmtiaDriver, set_activity_callback)) return 0;
  return d->get_last_error(&info) == OMTIA_SUCCESS && d->abi_major == OMTIA_DRIVER_ABI_MAJOR;
}
