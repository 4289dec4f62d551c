//! The API facade: what a user configures and calls. Everything here is a
//! thin layer over the layers below.

pub(crate) mod builder;
pub(crate) mod runtime;
pub(crate) mod tasks;
