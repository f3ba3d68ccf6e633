//! TODO(owner): ipv4
