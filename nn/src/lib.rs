//! sparrow-nn
