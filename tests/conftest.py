pytest_plugins = ()


def pytest_collection_modifyitems(config, items):
    # Integration and e2e tests start real processes; run them after units.
    order = {"unit": 0, "integration": 1, "e2e": 2}
    items.sort(
        key=lambda item: next((v for k, v in order.items() if f"/{k}/" in str(item.fspath)), 3)
    )
