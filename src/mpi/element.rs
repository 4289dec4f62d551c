//! The element types a message carries: the numeric types MPI has a
//! predefined datatype for.

use mpi_sys::MPI_Datatype;

/// A type whose values MPI carries as they are: the integers and floats
/// with a predefined MPI datatype. Messages are `Vec`s of these.
///
/// ```
/// fn message_of<T: selvedge::mpi::Element>(v: Vec<T>) -> Vec<T> { v }
/// assert_eq!(message_of(vec![1.5f64]).len(), 1);
/// ```
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The MPI datatype (a predefined handle: reading it makes no MPI
    /// call).
    #[doc(hidden)]
    fn datatype() -> MPI_Datatype;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($($t:ty => $handle:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            fn datatype() -> MPI_Datatype {
                // SAFETY: a constant handle the MPI library defines; read,
                // never written.
                unsafe { mpi_sys::$handle }
            }
        }
    )*};
}

element! {
    f32 => RSMPI_FLOAT,
    f64 => RSMPI_DOUBLE,
    i8 => RSMPI_INT8_T,
    i16 => RSMPI_INT16_T,
    i32 => RSMPI_INT32_T,
    i64 => RSMPI_INT64_T,
    u8 => RSMPI_UINT8_T,
    u16 => RSMPI_UINT16_T,
    u32 => RSMPI_UINT32_T,
    u64 => RSMPI_UINT64_T,
}
