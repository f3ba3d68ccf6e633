//! TODO(owner): tcp
