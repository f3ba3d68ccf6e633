//! TODO(owner): geneve
