//! TODO(owner): arp
