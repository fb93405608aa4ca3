"""Privacy analysis of PATE (numpy + scipy only; no torch anywhere in this package).

An auditor can install numpy and scipy and check every epsilon pate-learn reports with this
package alone. See the module docstrings for the symbols and the papers behind each bound.
"""

from pate.analysis.accountant import (
    ADD_REMOVE,
    RELATIONS,
    REPLACE_ONE,
    PrivacyEvent,
    RdpAccountant,
    confident_gnmax_event,
    gnmax_event,
    lnmax_event,
)
from pate.analysis.calibration import (
    calibrate_confident_gnmax,
    calibrate_gnmax_sigma,
    calibrate_lnmax_scale,
)
from pate.analysis.orders import DEFAULT_ORDERS, REFERENCE_ORDERS
from pate.analysis.pate2017 import (
    lnmax_log_mgf,
    lnmax_moments_accountant,
    lnmax_q_2017,
    lnmax_sens_at_k_2017,
    lnmax_smoothed_sensitivity_2017,
)
from pate.analysis.rdp import (
    confident_gnmax_rdp,
    conversion_term,
    eps_from_rdp,
    gnmax_log_q,
    gnmax_rdp,
    lnmax_log_q,
    lnmax_rdp,
    threshold_log_pr_answered,
    threshold_rdp,
)
from pate.analysis.sanitized_release import (
    SanitizedRelease,
    release_sanitized_epsilon,
    search_smooth_sensitivity_parameters,
    smooth_sensitivity_dp_parameters,
)
from pate.analysis.sensitivity import (
    check_conditions,
    gnmax_log_q0,
    gnss_rdp,
    gnss_rdp_curve,
    local_sensitivity_gnmax,
    local_sensitivity_threshold,
    smooth_sensitivity,
)

__all__ = [
    "PrivacyEvent",
    "RdpAccountant",
    "gnmax_event",
    "lnmax_event",
    "confident_gnmax_event",
    "ADD_REMOVE",
    "REPLACE_ONE",
    "RELATIONS",
    "DEFAULT_ORDERS",
    "REFERENCE_ORDERS",
    "gnmax_log_q",
    "gnmax_rdp",
    "threshold_log_pr_answered",
    "threshold_rdp",
    "lnmax_log_q",
    "lnmax_rdp",
    "confident_gnmax_rdp",
    "conversion_term",
    "eps_from_rdp",
    "gnmax_log_q0",
    "local_sensitivity_gnmax",
    "local_sensitivity_threshold",
    "smooth_sensitivity",
    "gnss_rdp",
    "gnss_rdp_curve",
    "check_conditions",
    "search_smooth_sensitivity_parameters",
    "release_sanitized_epsilon",
    "SanitizedRelease",
    "smooth_sensitivity_dp_parameters",
    "lnmax_q_2017",
    "lnmax_log_mgf",
    "lnmax_moments_accountant",
    "lnmax_sens_at_k_2017",
    "lnmax_smoothed_sensitivity_2017",
    "calibrate_gnmax_sigma",
    "calibrate_lnmax_scale",
    "calibrate_confident_gnmax",
]
