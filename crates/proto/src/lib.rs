//! The Queen wire protocol, without I/O: the stored message frame, segment blobs, the binary
//! push (`QPB1`) and transaction (`QTB1`) bodies, the framed pop answer (`QPF1`),
//! transaction-id hashes, UUIDv7 ids, timestamp rendering and the at-rest encryption envelope.
//!
//! Every decoder here is total: any byte string yields either a value or a typed error, never
//! a panic. All integers on the wire are little-endian.

pub mod domain;
pub mod encryption;
pub mod frame;
pub mod hash;
pub mod ids;
pub mod name;
pub mod pop_framed;
pub mod push_bin;
mod reader;
pub mod scalar;
pub mod segment;
pub mod sidecar;
pub mod tenant;
pub mod time;
pub mod wire;
mod writer;

pub use domain::{LeaseId, NotAPartitionId, PartitionId};
pub use frame::{Frame, FrameError};
pub use hash::{from_hex, to_hex, txn_hash};
pub use ids::{new_v7, ZERO_UUID};
pub use name::{Name, NameError};
pub use writer::EncodeError;
