//! The operator's rules for helm: the trusted chart sources, and whether
//! a chart's `lookup` reads the cluster.

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
}

impl HelmRules {
    /// Whether `chart` comes from a trusted source: its digest is listed, or
    /// its repository is a listed one or lies under one.
    pub fn trusts(&self, chart: &crate::contract::ops::ChartRef) -> bool {
        self.trusts_digest(chart) || self.trusts_repository(chart)
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
                "chart `{}` from `{}` is not from a trusted source",
                chart.name, chart.repository
            );
            self.refuse("inputs.chart", "helm.chart_sources", message);
        }
    }
}
