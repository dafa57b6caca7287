//! The kinds of node operation, listed once. `slipway run` runs those its flags turn on and
//! `slipway explain` reads them all, both through this list: a new kind is its folder (its
//! `shell::kind`) and a line in each of the three places below.

use std::sync::Arc;

use slipway::maintenance::shell::kind::MaintenanceArgs;
use slipway::nodeop::shell::kind::NodeOpArgs;
use slipway::plan::shell::PlanSettings;
use slipway::plan::shell::kind::PlanKind;
use slipway::reboot_policy::shell::kind::RebootPolicyArgs;
use slipway::runtime::Error;
use slipway::runtime::kind::Kinds;

/// `slipway run`'s flags of the kinds besides Plans (which always run).
#[derive(clap::Args, Debug, Clone)]
pub struct KindArgs {
    #[command(flatten)]
    maintenance: MaintenanceArgs,
    #[command(flatten)]
    reboot_policies: RebootPolicyArgs,
    #[command(flatten)]
    nodeops: NodeOpArgs,
}

impl KindArgs {
    /// Every kind on, each with its defaults: what `slipway explain` reads.
    pub fn every() -> KindArgs {
        KindArgs {
            maintenance: MaintenanceArgs::enabled(),
            reboot_policies: RebootPolicyArgs::enabled(),
            nodeops: NodeOpArgs::enabled(),
        }
    }

    /// The kinds these flags turn on, Plans first, in the order in which the budget lets what
    /// survived a restart keep a node: a Plan's, a policy's or a NodeOp's step under way finishes
    /// before a maintenance starts.
    pub fn kinds(&self, plan: PlanSettings) -> Result<Kinds, Error> {
        let image = plan.job.reboot_image.clone();
        let mut kinds: Kinds = vec![Arc::new(PlanKind::new(plan))];
        if let Some(k) = self.reboot_policies.kind(&image)? {
            kinds.push(Arc::new(k));
        }
        if let Some(k) = self.nodeops.kind(&image) {
            kinds.push(Arc::new(k));
        }
        if let Some(k) = self.maintenance.kind() {
            kinds.push(Arc::new(k));
        }
        Ok(kinds)
    }
}
