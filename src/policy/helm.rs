//! The operator's rules for helm: the trusted chart sources, the
//! operator's marketplace of approved charts, and whether a chart's
//! `lookup` reads the cluster.

use serde::Deserialize;

use super::rules::Check;

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HelmRules {
    /// Repository URLs or OCI references (a chart's repository must be one
    /// or lie under one), or `sha256:` chart digests.
    #[serde(default)]
    pub chart_sources: Vec<String>,
    /// Whether a chart's `lookup` reads the cluster (with the tenant's own
    /// credential) when it is rendered; off, `lookup` finds nothing.
    #[serde(default)]
    pub lookup: bool,
    /// Whether the tenant may install the charts of the operator's
    /// `helm_marketplace`, beyond its own `chart_sources`. Default: no.
    #[serde(default)]
    pub marketplace: bool,
    /// The operator's marketplace when `marketplace` is on (never read from
    /// the tenant's entry: filled in from the policy's own table).
    #[serde(skip)]
    pub market: Vec<MarketplaceChart>,
}

/// A chart of the operator's marketplace: one chart of one repository, in
/// the versions a requirement admits or as one archive by digest. Distinct
/// from a tenant's `chart_sources`, which trust whole repositories.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MarketplaceChart {
    /// A classic repository's URL or an `oci://` reference, exactly.
    pub repository: String,
    /// The chart's name.
    pub chart: String,
    /// A semver requirement (`>=1.2, <2`) the JobSpec's exact version must
    /// meet. Exactly one of `versions` and `digest`.
    #[serde(default)]
    pub versions: Option<String>,
    /// `sha256:<hex>` of the one archive admitted: the JobSpec names it as
    /// its chart's `digest`, and the pulled archive is checked against it.
    #[serde(default)]
    pub digest: Option<String>,
}

impl MarketplaceChart {
    /// Every problem of the entry, for the policy's load.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        match (&self.versions, &self.digest) {
            (Some(versions), None) => {
                if let Err(error) = semver::VersionReq::parse(versions) {
                    problems.push(format!("versions `{versions}`: {error}"));
                }
            }
            (None, Some(digest)) => {
                if crate::contract::artifact_ref::InputRef::parse(digest).is_err() {
                    problems.push(format!("digest `{digest}` is not sha256:<64 hex digits>"));
                }
            }
            _ => problems.push("exactly one of `versions` and `digest`".into()),
        }
        if self.repository.trim().is_empty() || self.chart.trim().is_empty() {
            problems.push("`repository` and `chart` are required".into());
        }
        problems
    }

    /// Whether `chart` is this entry: its repository, its name, and a
    /// version the requirement admits (an exact version, not a range) or
    /// the entry's digest.
    fn admits(&self, chart: &crate::contract::ops::ChartRef) -> bool {
        let same_repository =
            chart.repository.trim_end_matches('/') == self.repository.trim_end_matches('/');
        let admitted = match (&self.versions, &self.digest) {
            (Some(versions), _) => semver::VersionReq::parse(versions)
                .ok()
                .zip(semver::Version::parse(chart.version.trim_start_matches('v')).ok())
                .is_some_and(|(requirement, version)| requirement.matches(&version)),
            (None, Some(digest)) => chart.digest.as_deref() == Some(digest.as_str()),
            (None, None) => false,
        };
        same_repository && chart.name == self.chart && admitted
    }
}

impl HelmRules {
    /// Whether `chart` comes from a trusted source: its digest is listed,
    /// its repository is a listed one or lies under one, or it is a chart
    /// of the operator's marketplace the tenant may install.
    pub fn trusts(&self, chart: &crate::contract::ops::ChartRef) -> bool {
        self.trusts_digest(chart) || self.trusts_repository(chart) || self.on_market(chart)
    }

    /// Whether `chart` is on the operator's marketplace, for this tenant.
    pub fn on_market(&self, chart: &crate::contract::ops::ChartRef) -> bool {
        self.marketplace && self.market.iter().any(|entry| entry.admits(chart))
    }

    /// Whether the chart's digest itself is listed: the archive stored
    /// under it is trusted, wherever the JobSpec says it came from.
    pub fn trusts_digest(&self, chart: &crate::contract::ops::ChartRef) -> bool {
        chart.digest.as_deref().is_some_and(|digest| {
            self.chart_sources
                .iter()
                .any(|source| source.starts_with("sha256:") && source == digest)
        })
    }

    /// Whether the chart's repository is a listed one or lies under one
    /// (by whole path segments; a repository that climbs with `..` or
    /// hides characters with `%` never does).
    pub fn trusts_repository(&self, chart: &crate::contract::ops::ChartRef) -> bool {
        let repository = chart.repository.as_str();
        let plain = !repository
            .split('/')
            .any(|segment| segment == "." || segment == "..")
            && !repository.contains(['%', '?', '#', '@', '\\']);
        plain
            && self.chart_sources.iter().any(|source| {
                !source.starts_with("sha256:") && {
                    let source = source.trim_end_matches('/');
                    repository == source || repository.starts_with(&format!("{source}/"))
                }
            })
    }
}

impl Check<'_> {
    pub(super) fn chart(&mut self, chart: &crate::contract::ops::ChartRef) {
        if !self.rules.helm.trusts(chart) {
            let message = format!(
                "chart `{}` {} from `{}` is not from a trusted source, nor on the marketplace",
                chart.name, chart.version, chart.repository
            );
            self.refuse("inputs.chart", "helm.chart_sources", message);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::contract::ops::ChartRef;
    use crate::policy::OperatorPolicy;
    use serde_json::json;

    const DIGEST: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn chart(repository: &str, name: &str, version: &str, digest: Option<&str>) -> ChartRef {
        serde_json::from_value(json!({
            "repository": repository, "name": name, "version": version, "digest": digest
        }))
        .unwrap()
    }

    #[test]
    fn the_marketplace_admits_its_charts_to_the_tenants_that_opt_in() {
        let policy = OperatorPolicy::from_yaml(&format!(
            r#"
helm_marketplace:
  - {{repository: "https://charts.example.com/stable", chart: web, versions: ">=1.2, <2"}}
  - {{repository: "oci://registry.example.com/charts", chart: db, digest: "{DIGEST}"}}
tenants:
  team-a: {{helm: {{marketplace: true}}}}
  team-b: {{}}
"#
        ))
        .unwrap();
        let team_a = policy.tenant("team-a").operations.helm.clone();
        let team_b = policy.tenant("team-b").operations.helm.clone();
        let web = |version: &str| chart("https://charts.example.com/stable/", "web", version, None);
        assert!(team_a.trusts(&web("1.2.0")) && team_a.trusts(&web("1.9.3")));
        assert!(!team_b.trusts(&web("1.2.0")), "team-b did not opt in");
        // Out of range, a range itself, another chart of the repository,
        // a repository under the listed one: none is on the marketplace.
        assert!(!team_a.trusts(&web("2.0.0")) && !team_a.trusts(&web("^1.2")));
        assert!(!team_a.trusts(&chart(
            "https://charts.example.com/stable",
            "other",
            "1.2.0",
            None
        )));
        assert!(!team_a.trusts(&chart(
            "https://charts.example.com/stable/x",
            "web",
            "1.2.0",
            None
        )));
        // By digest: the JobSpec names that archive, which is checked.
        let db = |digest| chart("oci://registry.example.com/charts", "db", "9.9.9", digest);
        assert!(team_a.trusts(&db(Some(DIGEST))));
        assert!(!team_a.trusts(&db(None)));
        // The tenant's own entry cannot bring a marketplace of its own.
        assert!(OperatorPolicy::from_yaml(
            "tenants:\n  team-a: {helm: {marketplace: true, market: []}}\n"
        )
        .is_err());
    }

    #[test]
    fn a_marketplace_entry_says_versions_or_a_digest() {
        for (entry, problem) in [
            ("{repository: r, chart: c}", "exactly one of"),
            (
                &*format!("{{repository: r, chart: c, versions: '1', digest: '{DIGEST}'}}"),
                "exactly one of",
            ),
            (
                "{repository: r, chart: c, versions: 'not a range'}",
                "versions `not a range`",
            ),
            (
                "{repository: r, chart: c, digest: 'sha256:1'}",
                "digest `sha256:1`",
            ),
            ("{repository: '', chart: c, versions: '1'}", "are required"),
        ] {
            let problems = OperatorPolicy::from_yaml(&format!("helm_marketplace:\n  - {entry}\n"))
                .unwrap_err();
            assert!(
                problems.iter().any(|text| text.starts_with("helm_marketplace[0]: ") && text.contains(problem)),
                "{entry}: {problems:?}"
            );
        }
    }
}
