// `compensation(capability = ...)` takes the compensating capability's id as a string literal:
// the attribute is read while the macro expands, before `Self::RESTORE_ID` has a value.
use aip_connector::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct Target {
    id: String,
}

struct Files;

#[connector(id = "files")]
impl Files {
    /// Delete a file (it goes to the trash).
    #[capability(
        risk = high,
        side_effects = [delete],
        idempotency(required),
        data(sensitivity = internal),
        transaction(modes = [execute, compensate]),
        compensation(supported, capability = Self::RESTORE_ID),
    )]
    async fn delete(&self, input: Target, _key: IdempotencyKey) -> Result<(), ConnectorFailure> {
        let _ = input.id;
        Ok(())
    }
}

fn main() {}
