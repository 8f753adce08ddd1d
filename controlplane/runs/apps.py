from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "controlplane.runs"
    label = "runs"
    verbose_name = "Rollout runs"

    def ready(self) -> None:
        from controlplane import deploy_checks  # noqa: F401  (registers the checks)
