"""Binary layouts of the ZIP records we read, as named struct formats.

Field lists follow APPNOTE.TXT (sections 4.3.7 - 4.3.16); all little-endian.
"""

from __future__ import annotations

import struct

# End of central directory record (4.3.16), 22 bytes + comment.
#   signature, disk number, disk with central directory, entries on this disk,
#   total entries, central directory size, central directory offset, comment length
END_RECORD = struct.Struct("<4sHHHHIIH")
END_RECORD_SIGNATURE = b"PK\x05\x06"
MAX_COMMENT = 0xFFFF

# ZIP64 end of central directory locator (4.3.15), 20 bytes.
#   signature, disk with the ZIP64 end record, ZIP64 end record offset, total disks
ZIP64_LOCATOR = struct.Struct("<4sIQI")
ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"

# ZIP64 end of central directory record (4.3.14), 56 bytes + extensible data.
#   signature, size of remaining record, version made by, version needed,
#   disk number, disk with central directory, entries on this disk,
#   total entries, central directory size, central directory offset
ZIP64_END_RECORD = struct.Struct("<4sQHHIIQQQQ")
ZIP64_END_RECORD_SIGNATURE = b"PK\x06\x06"

# Central directory file header (4.3.12), 46 bytes + name + extra + comment.
#   signature, version made by, version needed, flags, method, mod time,
#   mod date, crc32, compressed size, uncompressed size, name length,
#   extra length, comment length, disk number start, internal attributes,
#   external attributes, local header offset
CENTRAL_HEADER = struct.Struct("<4sHHHHHHIIIHHHHHII")
CENTRAL_HEADER_SIGNATURE = b"PK\x01\x02"

# Local file header (4.3.7), 30 bytes + name + extra.
#   signature, version needed, flags, method, mod time, mod date,
#   crc32, compressed size, uncompressed size, name length, extra length
LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
LOCAL_HEADER_SIGNATURE = b"PK\x03\x04"

# Extra field header (4.5.1): header id, data size.
EXTRA_HEADER = struct.Struct("<HH")
ZIP64_EXTRA_ID = 0x0001
ZIP64_FIELD = struct.Struct("<Q")

# Values that mean "look in the ZIP64 extra field / end record".
SENTINEL_16 = 0xFFFF
SENTINEL_32 = 0xFFFFFFFF

# General purpose flag bits (4.4.4).
FLAG_ENCRYPTED = 0x0001
FLAG_DATA_DESCRIPTOR = 0x0008
FLAG_UTF8 = 0x0800

# Compression methods (4.4.5) we can decode.
METHOD_STORED = 0
METHOD_DEFLATED = 8
METHOD_NAMES = {METHOD_STORED: "stored", METHOD_DEFLATED: "deflate"}

# DEFLATE cannot expand input by more than about 1032:1; anything claiming
# more is a lie (a zip bomb or a corrupt size) and is refused up front.
MAX_DEFLATE_RATIO = 1032
# What one archive's central directory may hold: it is read whole and every record becomes an
# object (~300 bytes each as parsed), so an end record's claims are checked against these before
# the directory is read. Far above torch's archives (one entry per storage: 100,000 entries of a
# state dict are ~12 MiB), and a bound on a hostile one's memory (1,000,000 records: 370 MB RSS
# as `pt2serve ls` lists them).
MAX_DIRECTORY_ENTRIES = 1 << 20
MAX_DIRECTORY_BYTES = 256 << 20
