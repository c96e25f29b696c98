// libgd (Debian's libgd-dev): decoding JPEG/PNG, resampling and JPEG encoding for thumbnails.
#include <gd.h>
