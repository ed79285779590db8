//! UniMem Remote-Balloon extent tree (being written).
