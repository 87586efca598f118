//! The typed inputs by their older path: everything here is
//! [`super::ops`]'s.

pub use super::ops::{
    ansible::*, helm::*, kubernetes::*, opentofu::*, ssh::*, verification::*, ClusterRef,
    OperationInputs, PackageRef, Vars,
};
