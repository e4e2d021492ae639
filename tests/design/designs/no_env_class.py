# expect: no_env_class
class Game:
    def reset(self, seed=None):
        return "hi", {}
