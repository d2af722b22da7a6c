// A handler's future must be `Send` (the host runs it on any worker): holding an `Rc` (or a
// `std::sync::MutexGuard`) across an `.await` is reported on the handler's name, with rustc's
// note at the `.await`, not on `#[connector]`.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo")]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<u32, ConnectorFailure> {
        let counter = std::rc::Rc::new(1);
        std::future::ready(()).await;
        Ok(*counter)
    }
}

fn main() {}
