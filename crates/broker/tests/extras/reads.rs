//! Reads by offset (docs/wire.md §23).
