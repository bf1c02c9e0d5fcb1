"""The forward process: masking schedules and the seeded, coupled training views of a rollout batch."""

from ddmrl.masking.views import VIEWS, Views, apply_view, build_views, mask_frequency

__all__ = ["VIEWS", "Views", "apply_view", "build_views", "mask_frequency"]
