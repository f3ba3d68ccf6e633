//! TODO(owner): gre
