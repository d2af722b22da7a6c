// `ClaimedPlan` is the plan a commit claims: a handler that takes it must run only as the commit
// of a plan. With `execute` offered, or no transaction at all, its calls would have no plan.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Transfer {
    amount: u64,
}

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
        transaction(modes = [execute, plan, commit], requires_plan),
    )]
    async fn send(
        &self,
        transfer: Transfer,
        _key: IdempotencyKey,
        _checkpoint: Checkpoint,
        _plan: ClaimedPlan,
    ) -> Result<(), ConnectorFailure> {
        let _ = transfer.amount;
        Ok(())
    }

    #[capability(
        risk = medium,
        side_effects = [write],
        idempotency(required),
        data(sensitivity = internal),
    )]
    async fn hold(
        &self,
        transfer: Transfer,
        _key: IdempotencyKey,
        _plan: ClaimedPlan,
    ) -> Result<(), ConnectorFailure> {
        let _ = transfer.amount;
        Ok(())
    }
}

fn main() {}
