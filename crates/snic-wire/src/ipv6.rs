//! TODO(owner): ipv6
