//! sparrow-optim
