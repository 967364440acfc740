"""A Keras model built without its weights: every layer and variable exists
(paths, shapes, dtypes), no variable holds a value.

Keras creates a variable inside a ``StatelessScope`` without running its
initializer (it registers the variable as uninitialized); building with
``initialize_variables=False`` keeps it that way. The model is for
``layout_map_for`` and ``report`` only: to train, build the model again
under the distribution (or load it from a preset) with the derived map.
"""

from __future__ import annotations

from typing import Any


def abstract_model(cls: Any, /, **config: Any) -> Any:
    """``cls(**config)`` built inside ``keras.StatelessScope(initialize_variables=False)``:
    no weight is allocated (an 8-billion-parameter Llama builds in about a
    second and a few hundred MB of host memory).

    Raises ``TypeError`` when ``cls`` is not callable, and whatever ``cls``
    raises for a bad config.
    """
    if not callable(cls):
        raise TypeError(f"abstract_model: cls must be a model class; got {cls!r}.")
    import keras
    from keras.src.backend.common import global_state

    before = list(global_state.get_global_attribute("uninitialized_variables", []) or [])
    with keras.StatelessScope(initialize_variables=False):
        model = cls(**config)
    # Keras keeps every variable made in a stateless scope in a global list
    # and initializes all of them at the next stateless scope's exit: the
    # abstract model's variables must never be, so they leave the list.
    global_state.set_global_attribute("uninitialized_variables", before)
    return model
