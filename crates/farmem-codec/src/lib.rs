//! Page compression codecs for link compression (DaeMon §4.4).
