"""Sans-IO ZIP parsing: bytes in, small frozen records out.

Nothing here reads a file or awaits; every source hands this package bytes,
so one parser serves local files, HTTP ranges and S3 alike, and it can be
fuzzed directly.
"""

from .central import parse_central_directory
from .decode import EntryDecoder, check_decodable, crc32, crc32_combine, verify_crc
from .end import MAX_END_SEARCH, locate_directory
from .local import (
    LocalHeaderParser,
    data_offset,
    local_header_guess,
    local_header_size,
    locate_data,
    predicted_data_offset,
)
from .records import DirectorySpan, NeedBytes, NeedUntil, ZipEntry

__all__ = [
    "MAX_END_SEARCH",
    "DirectorySpan",
    "EntryDecoder",
    "LocalHeaderParser",
    "NeedBytes",
    "NeedUntil",
    "ZipEntry",
    "check_decodable",
    "crc32",
    "crc32_combine",
    "data_offset",
    "local_header_guess",
    "local_header_size",
    "locate_data",
    "locate_directory",
    "parse_central_directory",
    "predicted_data_offset",
    "verify_crc",
]
