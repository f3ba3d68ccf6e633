//! TODO(owner): udp
