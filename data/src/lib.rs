//! sparrow-data
