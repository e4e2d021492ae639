# expect: syntax_error
class BrokenEnv:
    def reset(self, seed=None)
        return "hi", {}
