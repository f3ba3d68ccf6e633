//! TODO(owner): vxlan
