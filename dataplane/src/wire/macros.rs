//! Macros shared by the header views.

/// Declares a protocol-number enum with an `Unknown` arm and `From` conversions both ways, in the
/// manner of smoltcp's `enum_with_unknown!`. `From<raw>` never yields `Unknown(v)` for a `v` that
/// has a named arm.
macro_rules! enum_with_unknown {
    (
        $(#[$meta:meta])*
        pub enum $name:ident($ty:ty) {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value with no named arm.
            Unknown($ty),
        }

        impl ::core::convert::From<$ty> for $name {
            fn from(value: $ty) -> Self {
                match value {
                    $( $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }
        }

        impl ::core::convert::From<$name> for $ty {
            fn from(value: $name) -> Self {
                match value {
                    $( $name::$variant => $value, )+
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}

/// Declares a fixed-length header view `$name<T: AsRef<[u8]>>` with `LEN`, `new_unchecked`,
/// `new_checked`, `check_len`, `into_inner` and `as_bytes`. Field accessors are written by hand
/// next to each view.
macro_rules! fixed_header_view {
    ($(#[$meta:meta])* $name:ident, $len:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of this header in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length. Accessors panic if the buffer is
            /// shorter than [`Self::LEN`]; use [`Self::new_checked`] on untrusted input.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer after checking that it holds at least [`Self::LEN`] bytes.
            ///
            /// # Errors
            /// [`Error::Truncated`](crate::wire::Error::Truncated) if it is shorter.
            pub fn new_checked(buffer: T) -> $crate::wire::Result<Self> {
                let view = Self::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            /// Checks that the buffer holds the whole header.
            ///
            /// # Errors
            /// [`Error::Truncated`](crate::wire::Error::Truncated) if it is shorter.
            pub fn check_len(&self) -> $crate::wire::Result<()> {
                let have = self.buffer.as_ref().len();
                if have < Self::LEN {
                    Err($crate::wire::Error::Truncated { need: Self::LEN, have })
                } else {
                    Ok(())
                }
            }

            /// Returns the wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The header's bytes (exactly [`Self::LEN`] of them).
            pub fn as_bytes(&self) -> &[u8] {
                &self.buffer.as_ref()[..Self::LEN]
            }
        }
    };
}
