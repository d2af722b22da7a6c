// A misspelt well-known profile compiles as a custom profile nothing serves: refused, with the
// profile meant. Another version of a known profile, or a profile of one's own namespace, is
// accepted.
use aip_connector::prelude::*;

struct Demo;

#[connector(id = "demo", profiles = [native_http, "aip.mpc.compat.v1", "native_htp", "aip.mcp.compat.v2", "acme.feed.v1", "rss"])]
impl Demo {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

struct Other;

#[connector(id = "other", profiles = [native_htp])]
impl Other {
    #[capability(risk = low, side_effects = [read], data(sensitivity = public))]
    async fn look(&self) -> Result<(), ConnectorFailure> {
        Ok(())
    }
}

fn main() {}
