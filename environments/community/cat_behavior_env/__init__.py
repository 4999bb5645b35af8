"""Cat behaviour: a cat makes its caretaker meet its needs without words, judged purr or meow (see ``cat_server.py``)."""
