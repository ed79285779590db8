//! LD_PRELOAD shim: places large anonymous mappings in far memory.
