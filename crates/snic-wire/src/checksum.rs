//! TODO(owner): checksum
